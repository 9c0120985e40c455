// Stand-in for the Tencent Cloud SDK (not on the module proxy): see hack/kube/modules/flannel/go.mod.
module github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/vpc

go 1.24.0
