// Package readme holds the test that keeps the Go code in the project's markdown
// (README.md and docs/*.md) compiling: see readme_test.go for the rules a block
// follows.
package readme
