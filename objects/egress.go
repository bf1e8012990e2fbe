package objects

import (
	"context"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/runspec"
)

// Egress keeps each namespace's own egress rule (GET/PUT …/egress) and says what the install
// permits: a namespace may narrow that, never widen it. The backend enforces
// Install().Effective(ns, choice).
type Egress interface {
	// Install is the install's egress configuration.
	Install() runspec.EgressInstall
	// Note says what the backend enforces instead of mode "internet" where it cannot enforce it;
	// "" where it can.
	Note() string
	// Choice is ns's stored rule; nil when its owner chose none.
	Choice(ctx context.Context, ns string) (*apiv1.EgressRule, error)
	// SetChoice stores ns's rule, which the API checked against Install.
	SetChoice(ctx context.Context, ns string, rule apiv1.EgressRule) error
}
