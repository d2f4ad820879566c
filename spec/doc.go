// Package spec holds the small, plain types that cross the Temporal
// boundary — the run spec users write as job.yaml, node membership, chunk
// inputs and results, checkpoint references, progress and status — so that
// workflows, activities and the CLI agree on them.
//
// Types here only gain fields; a field never changes meaning. The package
// imports no Temporal, engine or transport code: it is the vocabulary, not
// the behaviour. The one piece of logic it owns is reading and validating a
// job file, with errors that name the field and its line.
package spec
