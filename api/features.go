package api

// Admin API features a host reports in NodeStatus.features. A release
// lists what it serves; a client checks that every host that answers
// lists a feature before using it, because a host of an older release
// ignores request fields it does not know (a dry run would be applied).
const (
	// FeatureDryRun: ApplyRequest.dry_run and DeleteRequest.dry_run check
	// a write without making it.
	FeatureDryRun = "dry-run"
)

// Features returns the features this release serves.
func Features() []string { return []string{FeatureDryRun} }
