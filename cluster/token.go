package cluster

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// TokenFile is the name of the file in a node's data directory that holds
// the cluster token (mode 0600).
const TokenFile = "token"

// NewToken returns a fresh random cluster token (256 bits, hex).
func NewToken() string { return randomHex(32) }

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic("cluster: no randomness: " + err.Error())
	}
	return hex.EncodeToString(b)
}

// TokensEqual compares two tokens in constant time (for equal lengths).
func TokensEqual(a, b string) bool {
	return a != "" && subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// ReadTokenFile reads a token file, trimming surrounding white space.
func ReadTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", fmt.Errorf("%w: token file %s is empty", ErrBadRequest, path)
	}
	return t, nil
}

// loadToken returns the token stored in dir, or "" if there is none.
func loadToken(dir string) (string, error) {
	t, err := ReadTokenFile(filepath.Join(dir, TokenFile))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	return t, err
}

// storeToken writes the token file with mode 0600, atomically.
func storeToken(dir, token string) error {
	tmp := filepath.Join(dir, TokenFile+".tmp")
	if err := os.WriteFile(tmp, []byte(token+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, TokenFile))
}
