// Package errors stands in for the Tencent Cloud SDK's error type (see package common).
package errors

// TencentCloudSDKError is the SDK's error type; the stand-in never returns one.
type TencentCloudSDKError struct {
	Code    string
	Message string
}

func (e *TencentCloudSDKError) Error() string { return e.Code + ": " + e.Message }
