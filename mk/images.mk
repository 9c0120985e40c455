# Project image targets (included from the top-level Makefile). See docs/development/e2e.md.
#
# Images are built locally by `docker build` of the Dockerfiles in hack/images/ from the
# debootstrap base of hack/kube/images.sh plus packages from Debian, PyPI and Maven Central (no
# container registry), each cached by the hash of its inputs, so running a target twice is cheap.

IMAGES_HACK := hack/images

.PHONY: images-app images-e2e e2e-images images-split

images-app: ## snapshotjob/{operator,spark-runtime,member,examples}:dev, the product's images
	bash $(IMAGES_HACK)/build.sh app

images-e2e: ## snapshotjob/runtime-e2e:dev: the examples image plus the e2e tests' pipelines
	bash $(IMAGES_HACK)/build.sh e2e

e2e-images: images-e2e ## push the e2e image to the test bed's registry (make registry-up first)
	bash hack/kube/registry.sh push snapshotjob/runtime-e2e:dev

images-split: ## one image per role from hack/images/*.Dockerfile (images.env), SBOMs in dist/sbom
	bash $(IMAGES_HACK)/build.sh split
