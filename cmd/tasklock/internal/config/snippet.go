package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"

	"gopkg.in/yaml.v3"

	"github.com/tasklock/tasklock/ledger"
)

// MaxSnippet bounds a job snippet (ParseJob, Define): the most a stored
// job definition holds, ledger.MaxJobDef.
const MaxSnippet = ledger.MaxJobDef

// ParseJob checks data as one job: a mapping of the keys of a job of the
// file (see the package documentation), in YAML or JSON, with the same
// checks and the same messages as Load gives for a job of a file, each
// naming source as the file. It is how `tasklock jobs create -f`, the
// dashboard's POST /api/jobs and every serve node read a job defined at
// run time. A key that has no effect, which Define and Load refuse, is
// accepted here and named in Job.NoEffect, so that a job stored before
// that check still loads.
func ParseJob(source string, data []byte) (Job, error) {
	p := &parser{file: source, runTime: true, stored: true}
	j, ok := p.snippet(data)
	if !ok || len(p.errs) > 0 {
		for _, e := range p.errs {
			if e.Job == "jobs[0]" {
				e.Job = "" // a snippet is one job: no index to give
			}
		}
		return Job{}, p.errs
	}
	return j, nil
}

// snippet reads one job mapping.
func (p *parser) snippet(data []byte) (Job, bool) {
	if len(data) > MaxSnippet {
		p.errorf(nil, "", "larger than %d bytes", MaxSnippet)
		return Job{}, false
	}
	n := p.document(data, "want a job: a mapping with at least name, schedule and command or http")
	if n == nil {
		return Job{}, false
	}
	v := newValidator(nil)
	defer v.close()
	return p.job(0, n, map[string]int{}, v)
}

// document decodes data as exactly one YAML document and returns its
// root, resolved; nil (with the mistake recorded) when it is empty or not
// one document. empty is the message for an empty one.
func (p *parser) document(data []byte, empty string) *yaml.Node {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.errorf(nil, "", "empty: %s", empty)
		} else {
			p.syntax(data, err)
		}
		return nil
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
	case err != nil:
		p.syntax(data, err)
		return nil
	default:
		p.errorf(&extra, "", "a second YAML document: want one")
		return nil
	}
	root := &doc
	if root.Kind == yaml.DocumentNode {
		if len(root.Content) == 0 {
			p.errorf(root, "", "empty: %s", empty)
			return nil
		}
		root = root.Content[0]
	}
	root = resolve(root)
	if isNull(root) {
		p.errorf(root, "", "empty: %s", empty)
		return nil
	}
	return root
}

// Define checks data as one job (see ParseJob) and returns it with its
// stored form: the snippet's keys as compact JSON, which ParseJob reads
// back as the same job. When name is not empty the job is that one: a
// snippet without name: gets it, and one naming another job is refused.
// Every mistake is in the Errors returned, naming source.
func Define(source string, data []byte, name string) (Job, string, error) {
	p := &parser{file: source, runTime: true}
	if len(data) > MaxSnippet {
		p.errorf(nil, "", "larger than %d bytes", MaxSnippet)
		return Job{}, "", p.errs
	}
	n := p.document(data, "want a job: a mapping with at least name, schedule and command or http")
	if n == nil {
		return Job{}, "", p.errs
	}
	if n.Kind == yaml.MappingNode && name != "" {
		found := false
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := resolve(n.Content[i]), resolve(n.Content[i+1])
			if k.Kind == yaml.ScalarNode && k.Value == "name" {
				found = true
				if v.Kind == yaml.ScalarNode && !isNull(v) && v.Value != name {
					p.jobLabel = name
					p.errorf(v, "name", "%s differs from the job named in the request, %q", describe(v), name)
					return Job{}, "", p.errs
				}
			}
		}
		if !found {
			n.Content = append([]*yaml.Node{
				{Kind: yaml.ScalarNode, Tag: "!!str", Value: "name", Line: n.Line},
				{Kind: yaml.ScalarNode, Tag: "!!str", Value: name, Line: n.Line},
			}, n.Content...)
		}
	}
	if n.Kind == yaml.MappingNode {
		// Checked first so that anchors and merge keys are refused
		// before the decoding below could expand them.
		v := newValidator(nil)
		j, ok := p.job(0, n, map[string]int{}, v)
		v.close()
		if !ok || len(p.errs) > 0 {
			for _, e := range p.errs {
				if e.Job == "jobs[0]" {
					e.Job = ""
				}
			}
			return Job{}, "", p.errs
		}
		var m map[string]any
		if err := n.Decode(&m); err != nil {
			p.errorf(n, "", "%v", err)
			return Job{}, "", p.errs
		}
		def, err := json.Marshal(m)
		if err != nil {
			p.errorf(n, "", "cannot be stored as JSON: %v", err)
			return Job{}, "", p.errs
		}
		if len(def) > MaxSnippet {
			p.errorf(nil, "", "its JSON form is larger than %d bytes", MaxSnippet)
			return Job{}, "", p.errs
		}
		return j, string(def), nil
	}
	v := newValidator(nil)
	defer v.close()
	p.job(0, n, map[string]int{}, v) // reports "want a mapping"
	return Job{}, "", p.errs
}
