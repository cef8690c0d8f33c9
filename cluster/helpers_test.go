package cluster

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

func requireMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	st, err := os.Stat(path)
	require.NoError(t, err)
	require.Equal(t, want, st.Mode().Perm(), path)
}
