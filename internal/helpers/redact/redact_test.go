package redact_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/helpers/redact"
)

func TestURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ raw, want string }{
		{"https://fn.example.com", "https://fn.example.com"},
		{"https://fn.example.com/", "https://fn.example.com/"},
		{"https://fn.example.com/hooks/s3cret", "https://fn.example.com/xxxxx"},
		{"https://fn.example.com/a%2Fb/c", "https://fn.example.com/xxxxx"},
		{"https://u:p@fn.example.com:8443/x?token=s&token=t&region=eu#frag", "https://xxxxx:xxxxx@fn.example.com:8443/xxxxx?region=xxxxx&token=xxxxx#xxxxx"},
		{"https://u@fn.example.com/", "https://xxxxx@fn.example.com/"},
		{"http://[::1]:8080/p?q", "http://[::1]:8080/xxxxx?q=xxxxx"},
		{"http://bad host/", "(unreadable URL)"},
	} {
		t.Run(tc.raw, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, redact.URL(tc.raw))
		})
	}
}
