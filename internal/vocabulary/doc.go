// Package vocabulary holds the test that every error sentinel of lanes'
// public packages classifies to its stable code (cuda.Classify): the one
// error vocabulary, checked across every package, with no code of its own.
package vocabulary
