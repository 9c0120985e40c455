"""Pipeline modules of the end-to-end tests, shipped in ``snapshotjob/runtime-e2e:dev``.

hack/images/build.sh copies this folder into the image as the package ``e2e_pipelines``, so
a SnapshotJob names them ``e2e_pipelines.<module>``.
"""
