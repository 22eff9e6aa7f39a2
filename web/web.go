// Package web is the dashboard, embedded in the binary and served by the gateway.
package web

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var static embed.FS

// Handler serves the dashboard's files.
func Handler() http.Handler {
	sub, _ := fs.Sub(static, "static") // the directory is embedded, so Sub cannot fail
	return http.FileServerFS(sub)
}
