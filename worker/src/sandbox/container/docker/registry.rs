//! Pushing to and pulling from a snapshot registry (see the module docs of [`docker`](super)).

use super::*;

impl DockerRuntime {
    /// Name the image `source` also `target` (`repo[:tag]`).
    pub(super) async fn tag(&self, source: &str, target: &str) -> Result<(), RuntimeError> {
        let (repo, tag) = split_reference(target);
        let mut options = TagImageOptionsBuilder::default().repo(repo);
        if let Some(tag) = tag {
            options = options.tag(tag);
        }
        match self.docker.tag_image(source, Some(options.build())).await {
            Ok(()) => Ok(()),
            Err(e) if status(&e) == Some(404) => Err(RuntimeError::NoImage(source.to_owned())),
            Err(e) => Err(engine(e)),
        }
    }

    /// Drop the name `reference` of an image that has another (not forced: only the name goes).
    pub(super) async fn untag(&self, reference: &str) {
        let options = RemoveImageOptionsBuilder::default().force(false).noprune(true).build();
        match self.docker.remove_image(reference, Some(options), None).await {
            Ok(_) => {}
            Err(e) if status(&e) == Some(404) => {}
            Err(e) => {
                tracing::warn!(image = %reference, error = %engine_message(&e), "cannot drop an image's registry name")
            }
        }
    }

    pub(super) async fn image_id(&self, reference: &str) -> Result<String, RuntimeError> {
        match self.docker.inspect_image(reference).await {
            Ok(image) => image.id.ok_or_else(|| RuntimeError::Engine(format!("image {reference} has no id"))),
            Err(e) if status(&e) == Some(404) => Err(RuntimeError::NoImage(reference.to_owned())),
            Err(e) => Err(engine(e)),
        }
    }

    pub(super) async fn push_impl(&self, reference: &str, remote: &str) -> Result<String, RuntimeError> {
        let id = self.image_id(reference).await?;
        self.tag(reference, remote).await?;
        let (repo, tag) = split_reference(remote);
        let mut options = PushImageOptionsBuilder::default();
        if let Some(tag) = tag {
            options = options.tag(tag);
        }
        let mut stream = self.docker.push_image(repo, Some(options.build()), None);
        let mut pushed = Ok(());
        while let Some(item) = stream.next().await {
            if let Err(e) = item {
                pushed = Err(RuntimeError::Engine(format!("pushing {remote}: {}", engine_message(&e))));
                break;
            }
        }
        drop(stream);
        self.untag(remote).await;
        pushed.map(|()| id)
    }

    pub(super) async fn pull_impl(&self, remote: &str, reference: &str) -> Result<String, RuntimeError> {
        let (repo, tag) = split_reference(remote);
        let options = CreateImageOptionsBuilder::default().from_image(repo).tag(tag.unwrap_or("latest")).build();
        let mut stream = self.docker.create_image(Some(options), None, None);
        while let Some(item) = stream.next().await {
            if let Err(e) = item {
                let message = engine_message(&e);
                let missing =
                    status(&e) == Some(404) || message.contains("manifest unknown") || message.contains("not found");
                return Err(if missing {
                    RuntimeError::NoImage(remote.to_owned())
                } else {
                    RuntimeError::Engine(format!("pulling {remote}: {message}"))
                });
            }
        }
        drop(stream);
        let tagged = self.tag(remote, reference).await;
        self.untag(remote).await;
        tagged?;
        self.image_id(reference).await
    }
}
