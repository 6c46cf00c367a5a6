package api

// Admin API features a host reports in NodeStatus.features, which cluster
// status shows. A request that uses a feature is built so that a host
// without it refuses the request (a call of its own, a case of a oneof it
// does not know) rather than ignore what it does not know: the list is read
// before a request, and hosts that do not answer are not in it.
const (
	// FeatureDryRun: dry runs of applies and deletes (the DryRun call).
	FeatureDryRun = "dry-run"
	// FeatureCheckedWrites: dry runs and revision preconditions
	// (ApplyRequest.preconditions) travel to the leader as checked writes
	// (ForwardRequest.checked), which a leader of an older release refuses.
	FeatureCheckedWrites = "checked-writes"
)

// Features returns the features this release serves.
func Features() []string { return []string{FeatureDryRun, FeatureCheckedWrites} }
