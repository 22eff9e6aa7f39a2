package invoker_test

import (
	"testing"

	"github.com/stepgate/stepgate/internal/wiring/stack"
)

func TestMain(m *testing.M) { stack.Main(m) }
