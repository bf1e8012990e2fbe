// Package runtimes holds the function runtimes: the HTTP servers that wrap a user's handler
// (python/server.py for every python runtime, node/server.js for every nodejs one, embedded here) and the catalog that says, per runtime,
// how its image is made and run. Which runtimes exist is apiv1's (the wire contract); this package
// implements each of them. The server contract is runtimes/README.md.
package runtimes
