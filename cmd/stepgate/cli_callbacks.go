package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/stepgate/stepgate/protocol"
)

// callbacks dispatches "stepgate callbacks ...".
func (c *cli) callbacks(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usagef(`"callbacks" needs a command (resolve or reject)`)
	}
	switch sub, rest := args[0], args[1:]; sub {
	case "resolve":
		return c.callbacksResolve(ctx, rest, false)
	case "reject":
		return c.callbacksResolve(ctx, rest, true)
	default:
		return usagef("unknown command \"callbacks %s\" (want resolve or reject)", sub)
	}
}

// callbacksResolve is "callbacks resolve TOKEN|URL [JSON]" and "callbacks reject
// TOKEN|URL MESSAGE": the callback's token is the credential, so no bearer token is
// needed.
func (c *cli) callbacksResolve(ctx context.Context, args []string, reject bool) error {
	cmd, synopsis, second := "callbacks resolve", "TOKEN|URL [JSON]", "JSON"
	if reject {
		cmd, synopsis, second = "callbacks reject", "TOKEN|URL MESSAGE [--type T]", "MESSAGE"
	}
	fs := c.newFlagSet(cmd, synopsis)
	cf := addClientFlags(fs, true)
	typ := ""
	if reject {
		fs.StringVar(&typ, "type", "", "the rejection's `TYPE` (default rejected)")
	}
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 0:
		return usagef("%s: missing TOKEN", cmd)
	case reject && len(pos) == 1:
		return usagef("%s: missing %s", cmd, second)
	case len(pos) > 2:
		return usagef("%s: unexpected argument %q", cmd, pos[2])
	}
	// A whole callback URL names its token last.
	token := pos[0]
	if i := strings.LastIndex(token, "/v1/callbacks/"); i >= 0 {
		token = strings.TrimSuffix(token[i+len("/v1/callbacks/"):], "/")
	}
	cl, err := c.client(cf, nil)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	var resp interface {
		response
		result() *protocol.CallbackResolution
	}
	if reject {
		e := protocol.CallbackRejection{Message: pos[1]}
		if typ != "" {
			e.Type = &typ
		}
		r, err := cl.RejectCallbackWithResponse(ctx, token, e)
		if err != nil {
			return requestError("reject callback", err)
		}
		resp = rejectResponse{r}
	} else {
		data := "null"
		if len(pos) == 2 {
			data = pos[1]
		}
		if !json.Valid([]byte(data)) {
			return usagef("%s: %s is not JSON: %s", cmd, second, data)
		}
		r, err := cl.ResolveCallbackWithBodyWithResponse(ctx, token, "application/json", strings.NewReader(data))
		if err != nil {
			return requestError("resolve callback", err)
		}
		resp = resolveResponse{r}
	}
	if err := expect(resp, http.StatusOK); err != nil {
		return err
	}
	if cf.json {
		return printRaw(c.stdout, resp.GetBody())
	}
	res := resp.result()
	then := "; the run gets it when it awaits it"
	if res.Resumed {
		then = "; the run resumed"
	}
	_, err = fmt.Fprintf(c.stdout, "callback %s (seq %d) %s%s\n", res.Name, res.Seq, res.State, then)
	return err
}

type resolveResponse struct {
	*protocol.ResolveCallbackResponse
}

func (r resolveResponse) result() *protocol.CallbackResolution { return r.JSON200 }

type rejectResponse struct {
	*protocol.RejectCallbackResponse
}

func (r rejectResponse) result() *protocol.CallbackResolution { return r.JSON200 }
