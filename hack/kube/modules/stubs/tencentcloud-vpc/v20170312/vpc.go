// Package v20170312 stands in for the Tencent Cloud VPC API client, whose module is not on the
// Go module proxy. flanneld links it only for its tencent-vpc backend, which the testbed never
// selects (it runs host-gw); every call fails, saying so.
package v20170312

import "errors"

var errUnavailable = errors.New("tencent-vpc backend not available: flanneld built with a stub SDK")

// Filter selects route tables.
type Filter struct {
	Name   *string
	Values []*string
}

// Route is one VPC route.
type Route struct {
	DestinationCidrBlock *string
	GatewayType          *string
	GatewayId            *string
	RouteId              *uint64
	RouteType            *string
	Enabled              *bool
}

// RouteTable is a VPC route table.
type RouteTable struct {
	RouteTableId *string
	RouteSet     []*Route
}

// DescribeRouteTablesRequest asks for route tables.
type DescribeRouteTablesRequest struct{ Filters []*Filter }

// DescribeRouteTablesResponse answers DescribeRouteTablesRequest.
type DescribeRouteTablesResponse struct {
	Response *struct{ RouteTableSet []*RouteTable }
}

// DeleteRoutesRequest deletes routes.
type DeleteRoutesRequest struct {
	RouteTableId *string
	Routes       []*Route
}

// CreateRoutesRequest creates routes.
type CreateRoutesRequest struct {
	RouteTableId *string
	Routes       []*Route
}

// Client is the VPC API client.
type Client struct{}

// NewClientWithSecretId returns a client whose every call fails.
func NewClientWithSecretId(_, _, _ string) (*Client, error) { return &Client{}, nil }

// NewDescribeRouteTablesRequest returns an empty request.
func NewDescribeRouteTablesRequest() *DescribeRouteTablesRequest { return &DescribeRouteTablesRequest{} }

// NewDeleteRoutesRequest returns an empty request.
func NewDeleteRoutesRequest() *DeleteRoutesRequest { return &DeleteRoutesRequest{} }

// NewCreateRoutesRequest returns an empty request.
func NewCreateRoutesRequest() *CreateRoutesRequest { return &CreateRoutesRequest{} }

// DescribeRouteTables fails: the SDK is not available.
func (*Client) DescribeRouteTables(*DescribeRouteTablesRequest) (*DescribeRouteTablesResponse, error) {
	return nil, errUnavailable
}

// DeleteRoutes fails: the SDK is not available.
func (*Client) DeleteRoutes(*DeleteRoutesRequest) (struct{}, error) { return struct{}{}, errUnavailable }

// CreateRoutes fails: the SDK is not available.
func (*Client) CreateRoutes(*CreateRoutesRequest) (struct{}, error) { return struct{}{}, errUnavailable }
