package agentcore

import (
	"bytes"
	"fmt"
	"io"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// ownBody is the HTTP client the SDK is given: it hands the transport a
// request body the transport alone owns.
//
// The SDK wraps a request's body in a closer of its own and closes it as
// soon as the response's headers are back. The service may answer as
// soon as it has read the body, while net/http's write loop still holds
// the body for its last read; that read, on a closed body whose WriteTo
// answers io.EOF, fails the write, and the transport then closes the
// connection — under the InvokeCodeInterpreter result stream being read
// from it ("use of closed network connection"), which breaks a session
// whose code ran fine. Reading the (small, JSON) body into memory first
// takes the SDK's closer out of the race: the transport writes a body
// nobody else closes, as one write with the headers.
type ownBody struct{ next aws.HTTPClient }

func (c ownBody) Do(req *http.Request) (*http.Response, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return c.next.Do(req)
	}
	b, err := io.ReadAll(req.Body)
	_ = req.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("agentcore: reading the request body: %w", err)
	}
	req = req.Clone(req.Context())
	req.Body = io.NopCloser(bytes.NewReader(b))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	req.ContentLength = int64(len(b))
	return c.next.Do(req)
}
