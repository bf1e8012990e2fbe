package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/sless-dev/sless/api/apiv1"
)

// GetAsync reads an asynchronous invocation of a function.
func (c *Client) GetAsync(ctx context.Context, name, id string) (*apiv1.AsyncInvocation, error) {
	var out apiv1.AsyncInvocation
	if err := c.doJSON(ctx, http.MethodGet, c.nsPath("/functions/%s/async/%s", name, id), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListDeadLetters lists up to limit (0: the server's default, 100) of a function's dead-lettered
// asynchronous invocations, newest first.
func (c *Client) ListDeadLetters(ctx context.Context, name string, limit int) ([]apiv1.AsyncInvocation, error) {
	path := c.nsPath("/functions/%s/dead-letters", name)
	if limit != 0 {
		path += "?" + url.Values{"limit": {strconv.Itoa(limit)}}.Encode()
	}
	var l apiv1.List[apiv1.AsyncInvocation]
	err := c.doJSON(ctx, http.MethodGet, path, nil, &l)
	return l.Items, err
}

// Redrive queues a dead-lettered invocation again.
func (c *Client) Redrive(ctx context.Context, name, id string) (*apiv1.AsyncInvocation, error) {
	var out apiv1.AsyncInvocation
	if err := c.doJSON(ctx, http.MethodPost, c.nsPath("/functions/%s/dead-letters/%s/redrive", name, id), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
