// Command release checks that the tree is ready to be tagged as stepgate's release
// [version.Version], and prints what to do then: the tag, and the npm packages to
// publish in order. Run it from the module's root, with `make release`:
//
//	go run ./internal/tooling/release [-allow-dirty] [-skip-tests] [-skip-npm] [-out DIR]
//
// It runs every check, printing each as "ok", "FAIL" with the reason, or "skip", and
// exits with status 1 when one failed:
//
//   - versions: version.Version, the TypeScript SDK's package.json, package-lock.json
//     and SDK_VERSION, npm/stepgate's package.json and each of its
//     optionalDependencies, and
//     npm/create-stepgate's package.json are one version; protocol.Version is the
//     SDK's PROTOCOL_VERSION.
//   - changelog: CHANGELOG.md has "## [VERSION] - YYYY-MM-DD" and its link reference.
//   - clean: git has no uncommitted changes (-allow-dirty skips it).
//   - suite: ./test.sh passes, generated code included (-skip-tests skips it).
//   - versions also: the root go.mod and the Go SDK's modules' require the SDK's
//     modules (access, protocol, client, functions) at vVERSION.
//   - go install: `go install github.com/stepgate/stepgate/cmd/stepgate@vVERSION` works
//     from a module proxy holding the committed tree (HEAD) as vVERSION, with go.mod
//     without the SDK's replace directives, and the SDK's modules from HEAD at
//     vVERSION, and the binary it installs says "stepgate VERSION (function protocol P)".
//   - sdk pack: `npm pack` of sdk/typescript makes @stepgate/sdk at VERSION with its
//     built files.
//   - npm packages: `go run ./internal/tooling/npmdist -platforms all` makes the binary's
//     packages at VERSION (-skip-npm skips it).
//
// The tarballs are left in -out (a new temporary directory by default), so that the
// ones published are the ones checked. docs/releasing.md is the whole procedure.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/stepgate/stepgate/internal/tooling/repo"

	"github.com/stepgate/stepgate/internal/helpers/version"
	"github.com/stepgate/stepgate/protocol"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

// check is one of the release's checks. run returns what it found, printed after
// "ok", or why it failed.
type check struct {
	name string
	skip string // why the check is skipped; empty to run it
	run  func(ctx context.Context) (string, error)
}

// errChecksFailed is returned by run when a check failed; the checks have said why.
var errChecksFailed = errors.New("not ready: a check failed (FAIL above)")

// run parses args, runs every check in order under the module's root, printing each
// on stdout (the commands they run print on stdout and stderr), and then the ready
// line. It returns errChecksFailed when a check failed.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("release", flag.ContinueOnError)
	fs.SetOutput(stderr)
	allowDirty := fs.Bool("allow-dirty", false, "skip the check that git has no uncommitted changes, to try the rest out (go install still installs the committed HEAD)")
	skipTests := fs.Bool("skip-tests", false, "skip ./test.sh")
	skipNPM := fs.Bool("skip-npm", false, "skip go run ./internal/tooling/npmdist (the stepgate binary's npm packages)")
	out := fs.String("out", "", "where to leave the checked tarballs (default: a new temporary directory)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: go run ./internal/tooling/release [flags]\n\nChecks that the tree is ready to be tagged v%s (see docs/releasing.md).\n\nFlags:\n", version.Version)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}

	root, err := repo.Root()
	if err != nil {
		return err
	}
	if *out == "" {
		if *out, err = os.MkdirTemp("", "stepgate-release-*"); err != nil {
			return err
		}
	} else if *out, err = filepath.Abs(*out); err != nil {
		return err
	}
	sdkOut, npmOut := filepath.Join(*out, "sdk"), filepath.Join(*out, "npm")

	v := version.Version
	var sdkTarball string
	var npmTarballs []string
	checks := []check{
		{name: "versions", run: func(context.Context) (string, error) {
			return fmt.Sprintf("%s everywhere, function protocol %s", v, protocol.Version),
				checkVersions(root, v, protocol.Version)
		}},
		{name: "changelog", run: func(context.Context) (string, error) {
			date, err := checkChangelog(root, v)
			return fmt.Sprintf("CHANGELOG.md has [%s] - %s and its link", v, date), err
		}},
		{name: "clean", skip: skipIf(*allowDirty, "-allow-dirty"), run: func(ctx context.Context) (string, error) {
			return "git has no uncommitted changes", checkClean(ctx, root)
		}},
		{name: "suite", skip: skipIf(*skipTests, "-skip-tests"), run: func(ctx context.Context) (string, error) {
			return "./test.sh passed", runSuite(ctx, root, stdout, stderr)
		}},
		{name: "go install", run: func(ctx context.Context) (string, error) {
			got, err := checkGoInstall(ctx, root, "HEAD", v, protocol.Version)
			return fmt.Sprintf("go install …/cmd/stepgate@v%s from HEAD: %q", v, got), err
		}},
		{name: "sdk pack", run: func(ctx context.Context) (string, error) {
			var err error
			sdkTarball, err = packSDK(ctx, root, v, sdkOut, stderr)
			return sdkTarball, err
		}},
		{name: "npm packages", skip: skipIf(*skipNPM, "-skip-npm"), run: func(ctx context.Context) (string, error) {
			var err error
			npmTarballs, err = packNPM(ctx, root, v, npmOut, stderr)
			return fmt.Sprintf("%d tarballs in %s", len(npmTarballs), npmOut), err
		}},
	}

	failed, skipped := 0, []string{}
	for _, c := range checks {
		if c.skip != "" {
			fmt.Fprintf(stdout, "skip %s (%s)\n", c.name, c.skip)
			skipped = append(skipped, c.name)
			continue
		}
		found, err := c.run(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			failed++
			fmt.Fprintf(stdout, "FAIL %s: %s\n", c.name, indent(err.Error()))
			continue
		}
		fmt.Fprintf(stdout, "ok   %s: %s\n", c.name, found)
	}
	if failed > 0 {
		return errChecksFailed
	}

	fmt.Fprintln(stdout)
	if len(skipped) > 0 {
		fmt.Fprintf(stdout, "not checked: %s; run `make release` without flags before tagging.\n", strings.Join(skipped, ", "))
	}
	fmt.Fprint(stdout, publishPlan(root, v, sdkTarball, npmTarballs, npmOut))
	return nil
}

// publishPlan is the ready lines: the Go SDK's modules' tags on this commit, the tag
// vV on a commit of it whose go.mod takes the SDK from those tags, then the npm
// packages in the order that
// lets each one's dependencies resolve once it is published: the platform packages,
// stepgate (which depends on them), @stepgate/sdk, then create-stepgate (whose
// template depends on stepgate and @stepgate/sdk). npmTarballs are packNPM's, nil
// when it did not run.
func publishPlan(root, v, sdkTarball string, npmTarballs []string, npmOut string) string {
	var b strings.Builder
	var tags, drops []string
	for _, m := range sdkModules {
		tags = append(tags, m+"/v"+v)
		drops = append(drops, "-dropreplace="+modulePath+"/"+m)
	}
	fmt.Fprintf(&b, "ready: git tag %s && git push origin %s\n", strings.Join(tags, " "), strings.Join(tags, " "))
	fmt.Fprintf(&b, "then v%s, on this commit with go.mod taking the Go SDK from those tags (docs/releasing.md):\n", v)
	fmt.Fprintf(&b, "  git switch --detach && go mod edit %s && go mod tidy\n", strings.Join(drops, " "))
	fmt.Fprintf(&b, "  git commit -m 'go.mod: the Go SDK at v%s from its tags' -- go.mod go.sum && git tag v%s && git push origin v%s && git switch -\n", v, v, v)
	fmt.Fprintf(&b, "then npm publish, in this order:\n")
	if npmTarballs == nil {
		fmt.Fprintf(&b, "  go run ./internal/tooling/npmdist -out %s -platforms all\n", npmOut)
		names, err := npmPackageNames(root)
		if err != nil {
			fmt.Fprintf(&b, "  (%v)\n", err)
		}
		for _, name := range names {
			npmTarballs = append(npmTarballs, filepath.Join(npmOut, tarballName(name, v)))
		}
	}
	order := slices.Clone(npmTarballs)
	if n := len(order); n > 0 {
		order = slices.Insert(order, n-1, sdkTarball) // before create-stepgate, the last
	} else {
		order = append(order, sdkTarball)
	}
	for _, t := range order {
		fmt.Fprintf(&b, "  npm publish --access public %s\n", t)
	}
	return b.String()
}

func skipIf(skip bool, flag string) string {
	if skip {
		return flag
	}
	return ""
}

// indent indents the lines of a many-line reason under its FAIL line.
func indent(s string) string {
	return strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n     ")
}
