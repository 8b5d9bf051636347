package zktest

// NewEnsemble is newEnsemble, for the package's external tests.
var NewEnsemble = newEnsemble
