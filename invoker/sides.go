package invoker

// The invoker's sides, each reached by a method of Invoker and each a small face of its
// own, so that Invoker's own methods stay the run service's (starts, cancels, reruns,
// events, waits) and its life (Start, Drain, Stop): TestInvokerFaceStaysSmall counts them.

// Operations starts and cancels the tenants' bulk operations: a cancel or a rerun of
// every run matching a filter, done in batches by River jobs (cancel.go,
// rerun_operation.go).
type Operations struct{ inv *Invoker }

// Operations returns the invoker's bulk-operation side.
func (inv *Invoker) Operations() *Operations { return inv.operations }

// Callbacks resolves, rejects and lists runs' callbacks (callbacks.go).
type Callbacks struct{ inv *Invoker }

// Callbacks returns the invoker's callback side.
func (inv *Invoker) Callbacks() *Callbacks { return inv.callbacks }

// Checkpoints is what a function's invocation asks of the gateway while it runs, over
// the checkpoint endpoint or its duplex connection: journal a checkpoint (Append), write
// a stream (WriteStream, its body checked by StreamWriteOf), claim a new step body's
// invocation (Claim).
type Checkpoints struct{ inv *Invoker }

// Checkpoints returns the invoker's side for invocations in flight.
func (inv *Invoker) Checkpoints() *Checkpoints { return inv.checkpoints }

// Messages stores messages in runs' mailboxes, and starts a run with its first message
// (messages.go).
type Messages struct{ inv *Invoker }

// Messages returns the invoker's mailbox side.
func (inv *Invoker) Messages() *Messages { return inv.messages }
