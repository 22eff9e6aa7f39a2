// Package version is stepgate's release version: the module's, the command's and the
// npm packages' (the TypeScript SDK and the stepgate binary's), which `make release`
// checks agree with each other and with CHANGELOG.md.
package version

import "runtime/debug"

// Version is this release of stepgate, a semantic version without the leading "v"
// (the git tag is "v" + Version).
const Version = "0.1.0"

// String is the version a built binary reports: the module version Go recorded when
// it was built with `go install …@vX.Y.Z` (a tag), else Version with the VCS revision
// when the build has one ("0.1.0 (devel 1a2b3c4)").
func String() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return Version
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v[len("v"):]
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 7 {
			return Version + " (devel " + s.Value[:7] + ")"
		}
	}
	return Version
}
