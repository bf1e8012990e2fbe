// Package codestore keeps uploaded code archives, each under the key Key(namespace, function,
// sha256): on S3 (any S3-compatible server, through aws-sdk-go-v2) or in a local directory. Store is
// the contract both implement; the API writes archives, the build pipeline reads them, and a
// function's deletion removes its prefix.
package codestore
