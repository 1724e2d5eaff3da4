// Package specs builds the desired children of a MyDatabase as plain
// functions: a MyDatabase goes in, server-side apply configurations come out.
// Nothing here talks to the API server, so every builder is table-tested
// without a cluster; the reconciler only compares, applies and reports.
package specs
