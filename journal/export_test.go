package journal

// Unstorable exposes unstorable to the external tests.
var Unstorable = unstorable

// MaxPgMessage exposes maxPgMessage to the external tests.
const MaxPgMessage = maxPgMessage
