package api_test

import (
	"io"

	"github.com/sless-dev/sless/api"
)

var errEOF = io.EOF

func apiUploadLimit(n int64) api.Option { return api.WithUploadLimit(n) }
