// Package fnlog keeps what a function's author reads about it besides its status: the last build's
// log and the lifecycle events (apiv1.Event), both in the code store beside the function's
// archives (so deleting the function removes them), and the logs of instances that stopped, kept
// an hour. It also owns the NDJSON form of these lines and the since/tail selection every backend
// applies the same way.
package fnlog
