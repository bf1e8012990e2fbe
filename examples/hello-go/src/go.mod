// Its own module: the sless module's `go build ./...` and `go vet ./...` leave it out.
module sless.dev/examples/hello-go

go 1.22
