// Package readme holds the tests that keep the Go code in the project's markdown
// (README.md and docs/*.md) compiling (see readme_test.go for the rules a block
// follows), and that run the README tour's program against a real gateway.
package readme
