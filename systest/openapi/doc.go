// Package openapi checks the dashboard's OpenAPI document
// (dashboard/openapi.json) as a contract, with kin-openapi, a test-only
// dependency the library module must not require: that the document is a
// valid OpenAPI 3.1 document; that real answers of a dashboard over
// memstore, SQLite and Redis — every GET, the writes, and the errors 400,
// 401, 403, 404, 405, 409 and 501 — match it, and that the requests the
// server refuses with 400 the document refuses too; that the JSON types
// the CLI and the dashboard share (dashboard/apijson) have exactly the
// fields of their component schemas; and that `tasklock jobs list`,
// `jobs history`, `jobs audit` and `locks list` with --json print objects
// of those schemas.
//
// The package has no code of its own, only tests.
package openapi
