package step_test

import (
	"context"
	"fmt"
	"os"
	"testing"
)

// t stands in, in the examples, for the *testing.T that a test gives functionstest.New:
// an example has none. Where a test would fail, it panics, which fails the example; the
// cleanups (the harness's loopback servers) run when the package's tests end. Tests of
// the package declare their own t, which hides this one.
var t testing.TB = &exampleTB{}

type exampleTB struct {
	testing.TB // nil: the methods below are all that functionstest calls
	cleanups   []func()
}

func (*exampleTB) Helper()                      {}
func (*exampleTB) Context() context.Context     { return context.Background() }
func (e *exampleTB) Cleanup(f func())           { e.cleanups = append(e.cleanups, f) }
func (*exampleTB) Fatal(args ...any)            { panic(fmt.Sprint(args...)) }
func (*exampleTB) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }
func (*exampleTB) Error(args ...any)            { panic(fmt.Sprint(args...)) }
func (*exampleTB) Errorf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }
func (*exampleTB) Log(...any)                   {}
func (*exampleTB) Logf(string, ...any)          {}

func TestMain(m *testing.M) {
	code := m.Run()
	e := t.(*exampleTB)
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
	os.Exit(code)
}
