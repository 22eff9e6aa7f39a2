// Package layering holds one test, the module's layering table: for each package, what it
// may import of the module, and whether it may use River or the database driver. A new
// package gets a row; a new arrow between packages is a change of the table, reviewed as
// such.
package layering
