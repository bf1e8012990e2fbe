package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/sless-dev/sless/objects"
)

// database is what the invocation history and the asynchronous queue share: one pool, the schema
// (migrated once, by the history's background loop), the password to keep out of every message,
// and why the database cannot be used now.
type database struct {
	pool   *pgxpool.Pool
	secret string        // the password of the URL, kept out of every message
	ready  chan struct{} // closed once connected and migrated

	downMu  sync.Mutex
	downErr error // why the database cannot be used now; nil when it can
}

func newDatabase(pool *pgxpool.Pool, secret string) *database {
	return &database{pool: pool, secret: secret, ready: make(chan struct{}), downErr: errors.New("not connected to PostgreSQL yet")}
}

// What is unavailable, in a NotReadyError's reason.
const (
	history = "the invocation history"
	queue   = "the asynchronous queue"
)

// connect checks the database answers and applies the migrations (goose, under its advisory
// lock, so replicas starting together migrate once).
func (d *database) connect(ctx context.Context, logger *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, migrateTimeout)
	defer cancel()
	if err := d.pool.Ping(ctx); err != nil {
		return fmt.Errorf("connecting to PostgreSQL: %w", err)
	}
	sub, err := fs.Sub(migrations, "migrations")
	if err != nil {
		return err
	}
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, uint64(migrateTimeout/time.Second)))
	if err != nil {
		return err
	}
	db := stdlib.OpenDBFromPool(d.pool) // closing it leaves the pool open
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, sub, goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true), goose.WithSlog(logger), goose.WithVerbose(true))
	if err != nil {
		return fmt.Errorf("reading the migrations: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrating the schema: %w", err)
	}
	return nil
}

// deleteBatches runs a DELETE whose last argument is its batch size until it deletes fewer, each
// run within timeout, and returns how many rows it deleted.
func (d *database) deleteBatches(ctx context.Context, timeout time.Duration, sql string, args ...any) (int64, error) {
	var n int64
	for {
		qctx, cancel := context.WithTimeout(ctx, timeout)
		tag, err := d.pool.Exec(qctx, sql, args...)
		cancel()
		if err != nil {
			return n, err
		}
		n += tag.RowsAffected()
		if tag.RowsAffected() < deleteBatch {
			return n, nil
		}
	}
}

func (d *database) setDown(err error) {
	d.downMu.Lock()
	d.downErr = err
	d.downMu.Unlock()
}

func (d *database) reason() error {
	d.downMu.Lock()
	defer d.downMu.Unlock()
	if d.downErr == nil {
		return errors.New("connecting to PostgreSQL")
	}
	return d.downErr
}

// notReady is the error of a call that cannot be answered now: what (history or queue) is
// unavailable, and why, without the password.
func (d *database) notReady(what string, err error) error {
	return &objects.NotReadyError{Reason: what + " is unavailable: " + d.redact(err.Error())}
}

// redact keeps the password out of a message, whatever a library put into it.
func (d *database) redact(msg string) string {
	if len(d.secret) >= 4 {
		msg = strings.ReplaceAll(msg, d.secret, "xxxxx")
	}
	return msg
}
