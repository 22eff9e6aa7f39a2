// Package quickstart holds the test that follows the quickstarts, docs/quickstart.md
// and docs/quickstart-typescript.md, as a new user does: on a copy of the repository as
// a fresh clone has it, it runs each command the pages show, in order, and checks that
// each sample of output on the pages is what the command prints. It has no code of its
// own: see quickstart_test.go.
package quickstart
