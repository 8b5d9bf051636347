package consultest

// The binary's lookup and the agent's data directory, for the tests of
// this package.
const EnvBin = envBin

var FindBinary = findBinary

func (a *Agent) Dir() string { return a.dir.Path }
