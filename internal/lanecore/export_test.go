package lanecore

// PlanAfresh makes l plan every batch afresh, remembering none: tests
// compare a lane that remembers with one that does not.
func PlanAfresh(l *Lane) { l.steps.off = true }
