package local

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/sless-dev/sless/local/podman"
	"github.com/sless-dev/sless/local/runner"
	"github.com/sless-dev/sless/local/state"
	"github.com/sless-dev/sless/runspec"
)

// uidRanges hands out tenants' ranges of host uids (state.UIDBase) and takes back those of deleted
// namespaces once nothing of theirs is left: no container, running or stopped, and none being
// created. Two tenants never share a uid, so that neither's processes count against, or can
// signal, the other's; ranges are still finite (about 65,000), so deleted tenants' are reused.
type uidRanges struct {
	db   *state.DB
	list func(context.Context) ([]runner.Container, error) // this instance's containers
	log  *slog.Logger

	mu sync.Mutex
	// creating counts the containers being created in each range (podman has not returned).
	creating map[uint32]int
}

func newUIDRanges(db *state.DB, list func(context.Context) ([]runner.Container, error), log *slog.Logger) *uidRanges {
	return &uidRanges{db: db, list: list, log: log, creating: map[uint32]int{}}
}

// base is ns's range. A namespace's first one is allocated after taking back what deleted
// namespaces no longer use: only then does another namespace need one.
func (u *uidRanges) base(ctx context.Context, ns string) (uint32, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if b, ok, err := u.db.UIDRangeOf(ns); err != nil || ok {
		return b, err
	}
	if err := u.reclaimLocked(ctx); err != nil {
		// Nothing is given back; a new range is as safe.
		u.log.Warn("taking back the uid ranges of deleted namespaces", "error", err)
	}
	return u.db.UIDBase(ns)
}

// reclaimLocked releases the ranges of deleted namespaces that no container uses (u.mu held, so
// that no container is created in a range while it is looked at).
func (u *uidRanges) reclaimLocked(ctx context.Context) error {
	deleted, err := u.db.DeletedUIDRanges()
	if err != nil || len(deleted) == 0 {
		return err
	}
	cs, err := u.list(ctx)
	if err != nil {
		return err
	}
	used := map[string]bool{}
	for _, c := range cs {
		used[c.Labels[runspec.LabelNamespace]] = true
	}
	for ns, base := range deleted {
		if used[ns] || u.creating[base] > 0 {
			continue
		}
		if _, err := u.db.ReleaseUIDRange(ns); err != nil {
			return err
		}
	}
	return nil
}

// guard is podman's check before it creates a container in a tenant's range (Client.GuardIDs):
// the range must still be the namespace's its labels name; the container counts as being created
// until done.
func (u *uidRanges) guard(_ context.Context, s podman.Spec) (done func(), err error) {
	ns := s.Labels[runspec.LabelNamespace]
	u.mu.Lock()
	defer u.mu.Unlock()
	b, ok, err := u.db.UIDRangeOf(ns)
	if err != nil {
		return nil, err
	}
	if ns == "" || !ok || b != s.IDBase {
		return nil, fmt.Errorf("host uids %d… are not namespace %q's (it was deleted meanwhile)", s.IDBase, ns)
	}
	u.creating[b]++
	return func() {
		u.mu.Lock()
		defer u.mu.Unlock()
		if u.creating[b]--; u.creating[b] == 0 {
			delete(u.creating, b)
		}
	}, nil
}
