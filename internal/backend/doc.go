// Package backend holds what the in-module backends share beyond the
// driver contract. A backend's URL parser starts with [ParseQuery], and
// its opener is [OpenWith]:
//
//	func init() { driver.Register(Scheme, backend.OpenWith(ParseURL, New)) }
//
// The rest is validation with the portable limits ([ValidateInstance],
// [CanonicalAddress]), the stored JSON form ([Encode], [DecodeStored]),
// instance IDs ([NewID], [AddressID]), and error helpers ([Invalid],
// [Redacted], [TLSCause]). [PortCheck] finds a client whose TLS setting
// does not match its server's port.
//
// Only backends inside this module may import it. A helper moves to
// registry/driver only when an outside driver needs it.
package backend
