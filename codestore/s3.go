package codestore

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// S3Config says where the bucket is.
type S3Config struct {
	Bucket string
	// Endpoint is a custom S3 endpoint (MinIO, Ceph RGW, …); empty means AWS.
	Endpoint string
	// Region; the default is "us-east-1".
	Region string
	// AccessKey and SecretKey, when set, replace the SDK's usual credential chain (environment,
	// shared config, instance roles).
	AccessKey, SecretKey string
	// VirtualHosted switches from path-style URLs (bucket in the path, which S3-compatible servers
	// expect) to bucket-in-host-name.
	VirtualHosted bool
	// Timeout is how long a request may make no progress (connecting, sending the body, waiting
	// for the answer) before it is given up with ErrUnavailable. A body that keeps moving is never
	// cut off. The default is DefaultTimeout.
	Timeout time.Duration
}

// DefaultTimeout is S3Config.Timeout's default: a server that is down or hung is reported
// within seconds, not after the SDK's retries and the kernel's TCP timeouts (minutes).
const DefaultTimeout = 5 * time.Second

// ErrUnavailable is returned (wrapped) when the server does not answer: it refuses connections,
// makes no progress for S3Config.Timeout, or answers 5xx. Nothing was written: S3 creates an
// object only from a complete PUT. Retrying later may succeed; the API answers 503.
var ErrUnavailable = errors.New("code store unavailable")

// S3 stores each key as an object in one bucket.
type S3 struct {
	c       *s3.Client
	bucket  string
	timeout time.Duration
}

var _ Store = (*S3)(nil)

// NewS3 makes the client; it does not contact the server.
func NewS3(ctx context.Context, c S3Config) (*S3, error) {
	if c.Bucket == "" {
		return nil, errors.New("code store: an S3 bucket is required")
	}
	if c.Region == "" {
		c.Region = "us-east-1"
	}
	opts := []func(*config.LoadOptions) error{config.WithRegion(c.Region)}
	if c.AccessKey != "" {
		opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(c.AccessKey, c.SecretKey, "")))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("code store: loading AWS config: %w", err)
	}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		if c.Endpoint != "" {
			o.BaseEndpoint = aws.String(c.Endpoint)
		}
		o.UsePathStyle = !c.VirtualHosted
	})
	return &S3{c: client, bucket: c.Bucket, timeout: cmp.Or(c.Timeout, DefaultTimeout)}, nil
}

// watchdog cancels a request's context when it made no progress for a while.
type watchdog struct {
	ctx     context.Context
	cancel  context.CancelCauseFunc
	timeout time.Duration
	last    atomic.Int64 // unix nanoseconds of the last progress
	timer   *time.Timer
}

var errStalled = errors.New("no progress")

// watch starts a watchdog on ctx; done stops it (and cancels its context).
func (s *S3) watch(ctx context.Context) *watchdog {
	w := &watchdog{timeout: s.timeout}
	w.ctx, w.cancel = context.WithCancelCause(ctx)
	w.touch()
	w.timer = time.AfterFunc(w.timeout, w.check)
	return w
}

func (w *watchdog) touch() { w.last.Store(time.Now().UnixNano()) }

func (w *watchdog) check() {
	idle := time.Since(time.Unix(0, w.last.Load()))
	if idle >= w.timeout {
		w.cancel(errStalled)
		return
	}
	w.timer.Reset(w.timeout - idle)
}

func (w *watchdog) done() {
	w.timer.Stop()
	w.cancel(nil)
}

// failed wraps ErrUnavailable into err when the server did not answer (the watchdog fired, the
// request never got an HTTP answer, or the answer is 5xx); the caller's own cancellation and the
// server's 4xx answers stay as they are.
func (w *watchdog) failed(parent context.Context, err error) error {
	if parent.Err() != nil {
		return err
	}
	if errors.Is(context.Cause(w.ctx), errStalled) {
		return fmt.Errorf("%w: no progress for %s: %w", ErrUnavailable, w.timeout, err)
	}
	if code := httpStatus(err); code == 0 || code >= 500 {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// httpStatus is the status of the server's answer in err, 0 when there was none (the SDK reports
// a request that could not be sent as a response error with status 0).
func httpStatus(err error) (code int) {
	var status interface{ HTTPStatusCode() int }
	if !errors.As(err, &status) {
		return 0
	}
	defer func() {
		if recover() != nil {
			code = 0 // a response error without a response
		}
	}()
	return status.HTTPStatusCode()
}

// progressReader tells the watchdog about every read of a body.
type progressReader struct {
	r io.Reader
	w *watchdog
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 || err == io.EOF {
		p.w.touch()
	}
	return n, err
}

// progressReadSeeker keeps a seekable body seekable (the SDK checksums it, then rewinds it).
type progressReadSeeker struct {
	progressReader
	s io.Seeker
}

func (p *progressReadSeeker) Seek(off int64, whence int) (int64, error) { return p.s.Seek(off, whence) }

// watchedBody is a GetObject body: reads are progress, Close stops the watchdog.
type watchedBody struct {
	progressReader
	c io.Closer
}

func (b *watchedBody) Close() error {
	err := b.c.Close()
	b.w.done()
	return err
}

// EnsureBucket creates the bucket if it does not exist.
func (s *S3) EnsureBucket(ctx context.Context) error {
	w := s.watch(ctx)
	defer w.done()
	if _, err := s.c.HeadBucket(w.ctx, &s3.HeadBucketInput{Bucket: &s.bucket}); err == nil {
		return nil
	}
	w.touch()
	_, err := s.c.CreateBucket(w.ctx, &s3.CreateBucketInput{Bucket: &s.bucket})
	var owned *types.BucketAlreadyOwnedByYou
	if err != nil && !errors.As(err, &owned) {
		return fmt.Errorf("creating bucket %s: %w", s.bucket, w.failed(ctx, err))
	}
	return nil
}

// maxBuffered bounds what Put reads into memory from a reader that cannot seek.
const maxBuffered = 64 << 20

// Put uploads the object in one request (archives are at most the upload limit). A PUT that is
// cut off leaves no object: S3 stores none but a complete one.
func (s *S3) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if _, ok := r.(io.Seeker); !ok {
		// Over plain HTTP the SDK checksums the body and must rewind it: a reader that cannot
		// (a log written from memory, a pipe) is read into memory first, up to maxBuffered.
		b, err := io.ReadAll(io.LimitReader(r, maxBuffered+1))
		if err != nil {
			return fmt.Errorf("putting s3://%s/%s: %w", s.bucket, key, err)
		}
		if len(b) > maxBuffered {
			return fmt.Errorf("putting s3://%s/%s: a body that cannot seek is limited to %d bytes", s.bucket, key, maxBuffered)
		}
		r = bytes.NewReader(b)
	}
	w := s.watch(ctx)
	defer w.done()
	var body io.Reader = &progressReader{r: r, w: w}
	if sk, ok := r.(io.Seeker); ok {
		body = &progressReadSeeker{progressReader{r: r, w: w}, sk}
	}
	in := &s3.PutObjectInput{Bucket: &s.bucket, Key: &key, Body: body, ContentType: aws.String("application/zip")}
	if size >= 0 {
		in.ContentLength = aws.Int64(size)
	}
	if _, err := s.c.PutObject(w.ctx, in); err != nil {
		return fmt.Errorf("putting s3://%s/%s: %w", s.bucket, key, w.failed(ctx, err))
	}
	return nil
}

// Get streams the object. A body that stops moving for the timeout fails its read (so does a
// reader that pauses that long between reads); Close releases it.
func (s *S3) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	w := s.watch(ctx)
	out, err := s.c.GetObject(w.ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &key})
	if err != nil {
		w.done()
		var nsk *types.NoSuchKey
		if errors.As(err, &nsk) {
			return nil, fmt.Errorf("s3://%s/%s: %w", s.bucket, key, ErrNotFound)
		}
		return nil, fmt.Errorf("getting s3://%s/%s: %w", s.bucket, key, w.failed(ctx, err))
	}
	w.touch()
	return &watchedBody{progressReader{r: out.Body, w: w}, out.Body}, nil
}

// Exists asks with HEAD.
func (s *S3) Exists(ctx context.Context, key string) (bool, error) {
	w := s.watch(ctx)
	defer w.done()
	_, err := s.c.HeadObject(w.ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &key})
	if err == nil {
		return true, nil
	}
	var nf *types.NotFound
	if errors.As(err, &nf) {
		return false, nil
	}
	return false, fmt.Errorf("checking s3://%s/%s: %w", s.bucket, key, w.failed(ctx, err))
}

// DeletePrefix removes every object whose key starts with prefix, a page (≤ 1,000) at a time.
func (s *S3) DeletePrefix(ctx context.Context, prefix string) error {
	w := s.watch(ctx)
	defer w.done()
	p := s3.NewListObjectsV2Paginator(s.c, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: &prefix})
	for p.HasMorePages() {
		page, err := p.NextPage(w.ctx)
		if err != nil {
			return fmt.Errorf("listing s3://%s/%s: %w", s.bucket, prefix, w.failed(ctx, err))
		}
		w.touch()
		if len(page.Contents) == 0 {
			continue
		}
		ids := make([]types.ObjectIdentifier, 0, len(page.Contents))
		for _, o := range page.Contents {
			ids = append(ids, types.ObjectIdentifier{Key: o.Key})
		}
		out, err := s.c.DeleteObjects(w.ctx, &s3.DeleteObjectsInput{Bucket: &s.bucket, Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)}})
		if err != nil {
			return fmt.Errorf("deleting under s3://%s/%s: %w", s.bucket, prefix, w.failed(ctx, err))
		}
		w.touch()
		if len(out.Errors) > 0 {
			return fmt.Errorf("deleting s3://%s/%s: %s", s.bucket, aws.ToString(out.Errors[0].Key), aws.ToString(out.Errors[0].Message))
		}
	}
	return nil
}

// List returns the objects whose key starts with prefix, in key order.
func (s *S3) List(ctx context.Context, prefix string) ([]Object, error) {
	w := s.watch(ctx)
	defer w.done()
	var out []Object
	p := s3.NewListObjectsV2Paginator(s.c, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: &prefix})
	for p.HasMorePages() {
		page, err := p.NextPage(w.ctx)
		if err != nil {
			return nil, fmt.Errorf("listing s3://%s/%s: %w", s.bucket, prefix, w.failed(ctx, err))
		}
		w.touch()
		for _, o := range page.Contents {
			out = append(out, Object{Key: aws.ToString(o.Key), Size: aws.ToInt64(o.Size), Modified: aws.ToTime(o.LastModified)})
		}
	}
	return out, nil
}

// Delete removes the object (S3 answers a missing one as deleted).
func (s *S3) Delete(ctx context.Context, key string) error {
	w := s.watch(ctx)
	defer w.done()
	if _, err := s.c.DeleteObject(w.ctx, &s3.DeleteObjectInput{Bucket: &s.bucket, Key: &key}); err != nil {
		return fmt.Errorf("deleting s3://%s/%s: %w", s.bucket, key, w.failed(ctx, err))
	}
	return nil
}
