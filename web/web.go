// Package web is the dashboard, embedded in the binary and served by the gateway.
//
// It is plain ES modules and CSS with no build step: static/index.html loads
// static/js/app.js, which signs in with a token and talks to the /v1 API like any client.
package web

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
)

//go:embed static
var static embed.FS

// csp allows the dashboard's own files and API only: no inline scripts, nothing from
// elsewhere, no framing.
const csp = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// Handler serves the dashboard's files. Embedded files have no modification time, so
// each gets a content hash as its ETag, and browsers revalidate it on every load: a new
// binary never serves stale scripts.
func Handler() http.Handler {
	sub, _ := fs.Sub(static, "static") // the directory is embedded, so Sub cannot fail
	etags := map[string]string{}
	_ = fs.WalkDir(sub, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(sub, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		etags["/"+p] = `"` + hex.EncodeToString(sum[:8]) + `"`
		return nil
	})
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		p := path.Clean("/" + r.URL.Path)
		if p == "/" {
			p = "/index.html"
		}
		tag, ok := etags[p]
		if !ok { // no directory listings either
			http.NotFound(w, r)
			return
		}
		h.Set("ETag", tag)
		files.ServeHTTP(w, r)
	})
}
