package redis

// Script SHAs, to tell scripts apart in MONITOR output: tests count
// sweeps, sweeper claims and relists across processes.
var (
	SweepScriptSHA        = sweepScript.Hash()
	SweeperClaimScriptSHA = sweeperClaimScript.Hash()
	SnapshotScriptSHA     = snapshotScript.Hash()
	ServicesScriptSHA     = servicesScript.Hash()
)

// PublicOptions are the options registered as public with driver.Register.
var PublicOptions = publicOptions
