package codestore

import (
	"context"
	"errors"
	"fmt"
	"io"

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
}

// S3 stores each key as an object in one bucket.
type S3 struct {
	c      *s3.Client
	bucket string
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
	return &S3{c: client, bucket: c.Bucket}, nil
}

// EnsureBucket creates the bucket if it does not exist.
func (s *S3) EnsureBucket(ctx context.Context) error {
	if _, err := s.c.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &s.bucket}); err == nil {
		return nil
	}
	_, err := s.c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &s.bucket})
	var owned *types.BucketAlreadyOwnedByYou
	if err != nil && !errors.As(err, &owned) {
		return fmt.Errorf("creating bucket %s: %w", s.bucket, err)
	}
	return nil
}

// Put uploads the object in one request (archives are at most the upload limit).
func (s *S3) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	in := &s3.PutObjectInput{Bucket: &s.bucket, Key: &key, Body: r, ContentType: aws.String("application/zip")}
	if size >= 0 {
		in.ContentLength = aws.Int64(size)
	}
	if _, err := s.c.PutObject(ctx, in); err != nil {
		return fmt.Errorf("putting s3://%s/%s: %w", s.bucket, key, err)
	}
	return nil
}

// Get streams the object.
func (s *S3) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	out, err := s.c.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &key})
	if err != nil {
		var nsk *types.NoSuchKey
		if errors.As(err, &nsk) {
			return nil, fmt.Errorf("s3://%s/%s: %w", s.bucket, key, ErrNotFound)
		}
		return nil, fmt.Errorf("getting s3://%s/%s: %w", s.bucket, key, err)
	}
	return out.Body, nil
}

// Exists asks with HEAD.
func (s *S3) Exists(ctx context.Context, key string) (bool, error) {
	_, err := s.c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &key})
	if err == nil {
		return true, nil
	}
	var nf *types.NotFound
	if errors.As(err, &nf) {
		return false, nil
	}
	return false, fmt.Errorf("checking s3://%s/%s: %w", s.bucket, key, err)
}

// DeletePrefix removes every object whose key starts with prefix, a page (≤ 1,000) at a time.
func (s *S3) DeletePrefix(ctx context.Context, prefix string) error {
	p := s3.NewListObjectsV2Paginator(s.c, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: &prefix})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("listing s3://%s/%s: %w", s.bucket, prefix, err)
		}
		if len(page.Contents) == 0 {
			continue
		}
		ids := make([]types.ObjectIdentifier, 0, len(page.Contents))
		for _, o := range page.Contents {
			ids = append(ids, types.ObjectIdentifier{Key: o.Key})
		}
		out, err := s.c.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: &s.bucket, Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)}})
		if err != nil {
			return fmt.Errorf("deleting under s3://%s/%s: %w", s.bucket, prefix, err)
		}
		if len(out.Errors) > 0 {
			return fmt.Errorf("deleting s3://%s/%s: %s", s.bucket, aws.ToString(out.Errors[0].Key), aws.ToString(out.Errors[0].Message))
		}
	}
	return nil
}
