package chaos

import "time"

// Optional hooks of a server, for backends that differ from the rest.

// reader is a server whose instances are read through another URL than
// the one they register through: a read-only backend.
type reader interface{ readURL() string }

// A reader may name instances otherwise than they registered: it
// implements readID.
type idReader interface{ readID(*instance) string }

// readID is the ID the client reads in by on s.
func readID(s server, in *instance) string {
	if r, ok := s.(idReader); ok {
		return r.readID(in)
	}
	return in.id
}

// A server whose backend documents another recovery bound than
// recoveryBound implements bounded.
type bounded interface{ recoveryBound() time.Duration }

func boundOf(s server) time.Duration {
	if b, ok := s.(bounded); ok {
		return b.recoveryBound()
	}
	return recoveryBound
}

// readURL is the URL the suite's recovery check and client read s by.
func readURL(s server) string {
	if r, ok := s.(reader); ok {
		return r.readURL()
	}
	return s.url()
}
