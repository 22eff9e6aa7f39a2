// Package readme holds the checks of the code in the project's markdown (README.md and
// docs/*.md): every Go block compiles (see readme_test.go for the rules a block
// follows), and a block that names its source with an example comment equals it (see
// examples.go), so that what a page shows is what examples/ and the packages' Examples
// compile and run. cmd/markblocks adds those comments.
package readme
