package client

import (
	"context"
	"net/http"

	"github.com/sless-dev/sless/api/apiv1"
)

// GetEgress reads what the namespace's functions, jobs and cron runs may reach.
func (c *Client) GetEgress(ctx context.Context) (*apiv1.Egress, error) {
	var out apiv1.Egress
	if err := c.doJSON(ctx, http.MethodGet, c.nsPath("/egress"), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SetEgress narrows what the namespace's functions, jobs and cron runs may reach; a rule that would
// widen what the install permits fails with invalid_argument naming the entry.
func (c *Client) SetEgress(ctx context.Context, rule apiv1.EgressRule) (*apiv1.Egress, error) {
	if rule.Allow == nil {
		rule.Allow = []string{}
	}
	var out apiv1.Egress
	if err := c.doJSON(ctx, http.MethodPut, c.nsPath("/egress"), rule, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
