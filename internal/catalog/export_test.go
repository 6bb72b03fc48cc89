package catalog

import programs "github.com/lanesched/lanes/programs"

// DropAttribution forgets a program's logical attribution, as a capture
// whose graph nodes could not be attributed would leave it.
func DropAttribution(c *Catalog, id programs.ID) {
	for i := range c.programs[id].segments {
		c.programs[id].segments[i].logical = nil
	}
}
