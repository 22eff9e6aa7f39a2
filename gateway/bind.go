package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/stepgate/stepgate/journal/storable"
	"github.com/stepgate/stepgate/protocol"
)

// jsonBinder decodes every request body as JSON, the only body this API takes. A body
// sent with no Content-Type or with curl's default form type is read as JSON too, so
// `curl -d '{"name":"Ada"}'` works; any other declared type is a 415.
type jsonBinder struct{}

func (jsonBinder) Bind(i any, c echo.Context) error {
	req := c.Request()
	if ct := req.Header.Get(echo.HeaderContentType); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && mt != "application/x-www-form-urlencoded" && mt != "text/plain") {
			return &problemError{http.StatusUnsupportedMediaType, fmt.Sprintf("request body must be JSON, not %q", ct)}
		}
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		var maxErr *http.MaxBytesError
		var he *echo.HTTPError
		if errors.As(err, &maxErr) || (errors.As(err, &he) && he.Code == http.StatusRequestEntityTooLarge) {
			return echo.ErrStatusRequestEntityTooLarge
		}
		return badRequest("reading the request body: %v", err)
	}
	if raw, ok := i.(*json.RawMessage); ok && len(body) == 0 {
		*raw = nil // an absent input; the handler decides what it means
		return nil
	}
	if len(body) == 0 {
		if optionalBody(i) {
			return io.EOF // the strict handler passes a nil body on
		}
		return badRequest("request body is required (JSON)")
	}
	if !json.Valid(body) {
		var v any
		err := json.Unmarshal(body, &v)
		return badRequest("request body is not valid JSON: %v", err)
	}
	if err := json.Unmarshal(body, i); err != nil {
		return badRequest("request body does not match the expected shape: %v", err)
	}
	return nil
}

// optionalBody reports whether i is the body of an operation whose requestBody is not
// required in openapi.yaml, so that an empty body means "none" rather than a 400.
func optionalBody(i any) bool {
	switch i.(type) {
	case *protocol.RerunRunJSONRequestBody:
		return true
	}
	return false
}

// checkParams refuses a /v1 request whose path or query parameters, decoded, are not
// valid UTF-8 or hold a NUL byte: a 400 naming the parameter, before authentication
// and before any handler sees them (Postgres refuses both in text, which would be a
// 500). JSON decoding makes a body's strings valid UTF-8 but keeps a \u0000 as a NUL
// byte: the handlers check the string fields that reach Postgres (checkText).
func checkParams(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !strings.HasPrefix(c.Path(), "/v1/") {
			return next(c)
		}
		escaped := c.Request().URL.RawPath != "" // echo then routes on the escaped path
		for i, name := range c.ParamNames() {
			v := c.ParamValues()[i]
			if escaped {
				if u, err := url.PathUnescape(v); err == nil {
					v = u
				}
			}
			if !cleanText(v) {
				return badParam("path", name)
			}
		}
		for name, values := range c.QueryParams() {
			if !cleanText(name) || slices.ContainsFunc(values, func(v string) bool { return !cleanText(v) }) {
				return badParam("query", name)
			}
		}
		return next(c)
	}
}

// cleanText reports whether s is valid UTF-8 with no NUL byte: text Postgres stores.
func cleanText(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// checkText is the 400 naming field when the body's text v cannot be stored (a NUL
// byte, which a JSON string may carry as \u0000, or invalid UTF-8), and nil otherwise:
// for a body's string fields that reach Postgres as text or inside jsonb, where either
// would be refused, a 500.
func checkText(field, v string) error {
	if err := storable.CheckText(v); err != nil {
		return badRequest("%s %v", field, err)
	}
	return nil
}

// badParam is the 400 of a parameter that is not clean text; a name that is not clean
// itself is quoted with escapes.
func badParam(in, name string) error {
	return badRequest("%s parameter %s is not valid UTF-8 text or holds a NUL byte", in, strconv.Quote(name))
}
