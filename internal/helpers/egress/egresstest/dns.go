// Package egresstest helps tests of what the gateway dials: a DNS server whose
// answers the test chooses.
package egresstest

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"

	"golang.org/x/net/dns/dnsmessage"
)

// DNS is an authoritative DNS server for a fixed set of names, reached through an
// in-memory connection, so that tests control what names resolve to. Names it does
// not hold do not resolve.
type DNS struct {
	mu   sync.Mutex
	zone map[string][]netip.Addr // by lowercase fully-qualified name
}

// NewDNS returns a DNS whose names (keys of zone) resolve to their addresses.
func NewDNS(zone map[string][]string) *DNS {
	d := &DNS{zone: map[string][]netip.Addr{}}
	for name, addrs := range zone {
		d.Set(name, addrs...)
	}
	return d
}

// Set makes name resolve to addrs.
func (d *DNS) Set(name string, addrs ...string) {
	parsed := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		parsed = append(parsed, netip.MustParseAddr(a))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.zone[strings.ToLower(name)+"."] = parsed
}

// Resolver returns a Go resolver that asks d instead of the system's servers
// (names in /etc/hosts, such as localhost, are still answered from there).
func (d *DNS) Resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		client, server := net.Pipe()
		go d.serve(server)
		return client, nil
	}}
}

// serve answers length-prefixed (DNS over TCP) queries on c until it closes.
func (d *DNS) serve(c net.Conn) {
	defer c.Close()
	for {
		var size [2]byte
		if _, err := io.ReadFull(c, size[:]); err != nil {
			return
		}
		query := make([]byte, binary.BigEndian.Uint16(size[:]))
		if _, err := io.ReadFull(c, query); err != nil {
			return
		}
		answer, err := d.answer(query)
		if err != nil {
			return
		}
		if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(answer))), answer...)); err != nil {
			return
		}
	}
}

func (d *DNS) answer(query []byte) ([]byte, error) {
	var q dnsmessage.Message
	if err := q.Unpack(query); err != nil {
		return nil, err
	}
	resp := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: q.ID, Response: true, Authoritative: true, RecursionAvailable: true},
		Questions: q.Questions,
	}
	for _, question := range q.Questions {
		d.mu.Lock()
		addrs, ok := d.zone[strings.ToLower(question.Name.String())]
		d.mu.Unlock()
		if !ok {
			resp.RCode = dnsmessage.RCodeNameError
			continue
		}
		hdr := dnsmessage.ResourceHeader{Name: question.Name, Class: dnsmessage.ClassINET, TTL: 0}
		for _, a := range addrs {
			switch {
			case question.Type == dnsmessage.TypeA && a.Is4():
				resp.Answers = append(resp.Answers, dnsmessage.Resource{Header: hdr, Body: &dnsmessage.AResource{A: a.As4()}})
			case question.Type == dnsmessage.TypeAAAA && a.Is6():
				resp.Answers = append(resp.Answers, dnsmessage.Resource{Header: hdr, Body: &dnsmessage.AAAAResource{AAAA: a.As16()}})
			}
		}
	}
	return resp.Pack()
}
