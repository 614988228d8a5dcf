package apijson

// JobChange is what a create, update or delete of a job defined at run
// time did: the answer of POST, PUT and DELETE /api/jobs, and what
// `tasklock jobs create|update|delete --json` prints.
type JobChange struct {
	Job string `json:"job"`
	// Op is create, update or delete.
	Op string `json:"op"`
	// Version is the definition's version after the change.
	Version int64 `json:"version"`
	// Changed is false for an update to the definition in force, which
	// is left alone.
	Changed bool `json:"changed"`
	// Detail is the change's audit entry's Detail: what changed.
	Detail string `json:"detail"`
}

// Released is the answer of a forced release of a lock: POST
// /api/locks/{key}/release, and `tasklock locks release --json`.
type Released struct {
	Released string `json:"released"` // the lock's key
}
