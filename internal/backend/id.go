package backend

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/roster-go/roster/registry/driver"
)

// NewID returns a fresh instance ID of the form
// <service>-<host>-<port>-<random>. The random suffix (64 bits) means two
// processes registering the same address — a restarted container whose
// predecessor has not expired yet, or two workers behind one port — never
// overwrite each other's registration.
func NewID(service, address string) string {
	i := driver.Instance{Address: address}
	host := strings.Map(func(r rune) rune {
		if r < 0x80 && idChar(byte(r)) {
			return r
		}
		return '_'
	}, i.Host())
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand documents a fatal error instead)
	id := service + "-" + host + "-" + strconv.Itoa(i.Port()) + "-" + hex.EncodeToString(b[:])
	if len(id) > MaxIDLen {
		id = id[len(id)-MaxIDLen:]
		id = strings.TrimLeft(id, "._-")
	}
	return id
}

// AddressID is the ID of an instance known only by its address, where
// the backend has no instance IDs (DNS SRV, endpoints another controller
// wrote on Kubernetes): the address with every character an ID cannot
// hold made '-' — "10.0.0.7:8080" is "10.0.0.7-8080", "[2001:db8::2]:9090"
// is "2001-db8--2--9090" — so it is stable for as long as the address is.
func AddressID(addr string) string {
	id := strings.Map(func(r rune) rune {
		if r < 0x80 && idChar(byte(r)) {
			return r
		}
		return '-'
	}, addr)
	return strings.TrimLeft(id, "-._")
}
