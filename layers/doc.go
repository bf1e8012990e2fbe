// Package layers turns user code (a zip archive or an fs.FS) into a deterministic, gzip-compressed
// OCI layer, enforcing the path-safety and size rules every function image relies on.
//
// The same input and options always give the same bytes and so the same digest: entries are
// sorted, owned by 0:0, with normalised modes and a fixed mtime, and every parent directory is
// written explicitly. Unsafe input (path traversal, links, special files, whiteout names, NUL bytes,
// duplicates, oversize or over-compressed archives) is rejected with a typed error before a layer
// exists. Limits are checked on the bytes actually decompressed, never on sizes an archive declares,
// and the layer is produced in one streaming pass (tar → diffID → gzip → digest), spilling to a
// temporary file beyond a small threshold so memory does not grow with the archive.
package layers
