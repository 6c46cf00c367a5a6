package tenantsync

// HealthPushEvery is healthPushEvery, for the tests of package
// tenantsync_test.
const HealthPushEvery = healthPushEvery
