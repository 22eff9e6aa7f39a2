package storable

// MaxPgMessage exposes maxPgMessage to the external tests.
const MaxPgMessage = maxPgMessage
