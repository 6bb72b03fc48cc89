// What the external tests of demo reach inside it.

package demo

// ParseManifest checks a manifest's text (all but the files it names).
func ParseManifest(b []byte) error {
	_, err := parseManifest(b)
	return err
}

// ScalarBits is a manifest's JSON value as a scalar's bits.

// StructBytes is structBytes, for the tests.
var StructBytes = structBytes
var ScalarBits = scalarBits
