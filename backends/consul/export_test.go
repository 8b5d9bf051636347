package consul

// PublicOptions are the options Register declares public, for the test
// that keeps the list in step with ParseURL.
var PublicOptions = publicOptions

// The default connection budget, for the tests that check it.
const DefaultMaxConns, DefaultMaxWatchConns = defaultMaxConns, defaultMaxWatchConns
