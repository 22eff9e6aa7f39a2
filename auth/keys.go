package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
)

// The algorithms a Verifier can accept, by family. "none" is never one of them.
var (
	hmacAlgorithms    = []string{"HS256", "HS384", "HS512"}
	rsaAlgorithms     = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}
	ecdsaAlgorithms   = []string{"ES256", "ES384", "ES512"}
	ed25519Algorithms = []string{"EdDSA"}
)

// Algorithms lists every JWT algorithm a [Verifier] can be configured to accept.
func Algorithms() []string {
	var all []string
	for _, f := range [][]string{hmacAlgorithms, rsaAlgorithms, ecdsaAlgorithms, ed25519Algorithms} {
		all = append(all, f...)
	}
	return all
}

// asymmetricAlgorithms are those a JWKS can serve keys for.
func asymmetricAlgorithms() []string {
	var all []string
	for _, f := range [][]string{rsaAlgorithms, ecdsaAlgorithms, ed25519Algorithms} {
		all = append(all, f...)
	}
	return all
}

// keyFits reports whether key verifies tokens signed with alg. Keys are typed per
// algorithm family, so an HMAC token is never checked against a public key used as a
// secret, and an ES256 token only against a P-256 key.
func keyFits(alg string, key any) bool {
	switch k := key.(type) {
	case []byte:
		return strings.HasPrefix(alg, "HS")
	case *rsa.PublicKey:
		return strings.HasPrefix(alg, "RS") || strings.HasPrefix(alg, "PS")
	case *ecdsa.PublicKey:
		switch alg {
		case "ES256":
			return k.Curve == elliptic.P256()
		case "ES384":
			return k.Curve == elliptic.P384()
		case "ES512":
			return k.Curve == elliptic.P521()
		}
	case ed25519.PublicKey:
		return alg == "EdDSA"
	}
	return false
}

// keyAlgorithms returns the algorithms key can verify, or an error when the key is not
// one a Verifier accepts.
func keyAlgorithms(key crypto.PublicKey) ([]string, error) {
	switch k := key.(type) {
	case *rsa.PublicKey:
		if k.N.BitLen() < 2048 {
			return nil, fmt.Errorf("an RSA key of %d bits is too weak (at least 2048)", k.N.BitLen())
		}
		return rsaAlgorithms, nil
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256():
			return []string{"ES256"}, nil
		case elliptic.P384():
			return []string{"ES384"}, nil
		case elliptic.P521():
			return []string{"ES512"}, nil
		}
		return nil, fmt.Errorf("an ECDSA key on curve %s is not supported (P-256, P-384 or P-521)", k.Curve.Params().Name)
	case ed25519.PublicKey:
		if len(k) != ed25519.PublicKeySize {
			return nil, errors.New("an Ed25519 key must be 32 bytes")
		}
		return ed25519Algorithms, nil
	}
	return nil, fmt.Errorf("a %T is not a supported public key (RSA, ECDSA or Ed25519)", key)
}

// ParsePublicKeys returns the public keys of the PEM blocks in data: PUBLIC KEY (PKIX),
// RSA PUBLIC KEY (PKCS #1) or CERTIFICATE blocks holding RSA (2048 bits or more), ECDSA
// (P-256, P-384, P-521) or Ed25519 keys. A private key is refused: the gateway only
// verifies.
func ParsePublicKeys(data []byte) ([]crypto.PublicKey, error) {
	var keys []crypto.PublicKey
	for n := 1; ; n++ {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		var key crypto.PublicKey
		var err error
		switch b.Type {
		case "PUBLIC KEY":
			key, err = x509.ParsePKIXPublicKey(b.Bytes)
		case "RSA PUBLIC KEY":
			key, err = x509.ParsePKCS1PublicKey(b.Bytes)
		case "CERTIFICATE":
			var cert *x509.Certificate
			if cert, err = x509.ParseCertificate(b.Bytes); err == nil {
				key = cert.PublicKey
			}
		default:
			if strings.Contains(b.Type, "PRIVATE KEY") {
				return nil, fmt.Errorf("PEM block %d is a private key (%s): give the gateway only the public key", n, b.Type)
			}
			return nil, fmt.Errorf("PEM block %d is a %s, not a PUBLIC KEY, RSA PUBLIC KEY or CERTIFICATE", n, b.Type)
		}
		if err != nil {
			return nil, fmt.Errorf("PEM block %d (%s): %w", n, b.Type, err)
		}
		if _, err := keyAlgorithms(key); err != nil {
			return nil, fmt.Errorf("PEM block %d: %w", n, err)
		}
		keys = append(keys, key)
	}
	if len(keys) == 0 {
		return nil, errors.New("no PEM block found")
	}
	return keys, nil
}
