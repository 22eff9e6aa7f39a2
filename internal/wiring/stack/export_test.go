package stack

// TestLogger is testLogger, for the external tests.
var TestLogger = testLogger
